import { fakeTarget } from '../helpers/kube-target.ts';
import { whereaboutsScenarios } from './whereabouts-scenarios.ts';

whereaboutsScenarios('fake API server', () => fakeTarget());
