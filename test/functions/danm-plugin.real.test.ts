import { realTarget } from '../helpers/kube-target.ts';
import { danmPluginScenarios } from './danm-plugin-scenarios.ts';

danmPluginScenarios('real kube-apiserver', realTarget);
