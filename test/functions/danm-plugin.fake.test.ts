import { fakeTarget } from '../helpers/kube-target.ts';
import { danmPluginScenarios } from './danm-plugin-scenarios.ts';

danmPluginScenarios('fake API server', () => fakeTarget());
